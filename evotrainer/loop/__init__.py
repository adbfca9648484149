"""The co-evolution loop, one module per step, so one phase reads in file order:

    train.py       the trainer service trains a phase on main; rollouts, checkpoint, held-out eval
    diagnose.py    the Diagnostician reads the phase's evidence and says what is failing
    critique.py    the Critic confirms, rejects, or asks for more evidence (router: back to diagnose)
    new_metric.py  a metric the Critic proposes is validated on earlier phases, then gates main's candidates
    engineer.py    the Engineer commits one single-variable candidate per confirmed diagnosis
    backtest.py    the Backtester judges each candidate (replay checks, pilots); router: back to engineer
    promote.py     passing candidates merge into main, chosen by the promotion policy (a pure function)
    effect.py      the realized effect of last phase's promotion (counterfactual trainings); a loss is rolled back
    librarian.py   outcomes and realized effects become skills; router: stop or train

Beside the steps: ``keep_discard.py`` (the keep/discard baseline's one step), ``gate.py`` (the human gate before a
merge), ``escalation.py`` (a stalled run), ``resume.py`` (a promoted repair trains on from an earlier checkpoint when
a phase harmed the policy or its update overshot), ``evidence.py`` (the per-phase rollout cache), ``runtime.py`` and
``state.py``.

Every step is ``step(rt, state) -> update``: ``rt`` is the :class:`~evotrainer.loop.runtime.Runtime` (run
directory, config, trainer client, agents, console, per-phase evidence cache) and ``state`` the typed
:class:`~evotrainer.loop.state.RunState` that LangGraph checkpoints after every step. ``evotrainer/graph.py`` wires
the steps together; each can be called and tested on its own.
"""
