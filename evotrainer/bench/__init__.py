"""The bench wing: ``evotrainer bench``, arms trained on equal budgets and compared paired per item and stream.

    arms.py     what each arm changes and where its runs live (``BENCH/<arm>-seed<N>``)
    runner.py   running the arms, and the bench's summary (bench.json, bench.md)
"""
