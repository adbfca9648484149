"""The judge wing: what decides whether a harness edit reaches ``main``.

    checks.py     the backtest: replay and safety checks of a candidate against main on retained rollouts
    replay.py     replaying rewards and filters in the sandbox, and the figures replay compares (with noise floors)
    pentest.py    the reward pentest: does a reward pay the domain's null probes (checked before any trial)
    safety.py     the safety checks themselves (self-tests, alignment with ``verified``, diagnostics kept)
    arbitrate.py  the evaluator's ruling on a self-test that pins a reward or prompt it contradicts, and its rewrite
    scoring.py    the one definition of the reward total, advantages and "did this rollout train"
    variables.py  what one edit changes (the single variable a candidate may declare)
    targets.py    the target metrics a candidate may declare, and how each is measured on rollouts
    ref.py        ``evotrainer backtest RUN REF``: the same backtest for any commit, from the command line
"""
