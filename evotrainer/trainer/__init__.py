"""The trainer wing: a long-lived HTTP service that owns the accelerator and trains phases and pilots (TRL GRPO).

    service.py     the FastAPI service (start a phase at a harness sha, poll, fetch, evaluate, health)
    client.py      the run's client, and starting a local service on loopback when no URL is configured
    wire.py        the request and result types both sides share (they carry the config's own sections)
    grpo.py        one phase or pilot: GRPOTrainer with the harness hooks, rollouts logged, held-out eval
    hooks.py       the GRPOTrainer subclass that applies the harness (rewards, filters, knobs) in the sandbox
    shapes.py      rollout shapes: single-turn, and multi-turn with tool calls and an environment mask
    model.py       loading the policy (tiny, Hugging Face, LoRA) and scoring it on a split
    generation.py  how rollouts are generated (transformers or colocated vLLM)
    dashboards.py  training.report_to: TRL's dashboards, one run per phase
    launch.py      several processes for one phase (accelerate launch), and a rank's entry point
    ranks.py       which rank this process is, and how many there are
    parent.py      dying with another process (the service with its run, a rank with the service)
"""
