"""The policy wing: the starting policy a run trains.

    build.py  the tiny local policy (character tokenizer, small transformer, supervised warm-up, cached), or a
              named Hugging Face model resolved as it is
    gguf.py   ``evotrainer policy import``: a GGUF file (e.g. the llm extra's SmolLM2) to a model folder
"""
