"""The bench wing: ``evotrainer bench``, arms trained on equal budgets and compared paired per item and stream.

    arms.py     what each arm changes and where its runs live (``BENCH/<arm>-seed<N>``; the fault bench's
                ``BENCH/<defect>/<arm>-seed<N>`` and ``BENCH/clean/<arm>-seed<N>``)
    runner.py   running the arms, and the bench's summary (bench.json, bench.md)
    faults.py   the fault bench (``--faults``): each catalogue or generated defect planted in the seed, what runs,
                recovery per defect-seed, the named-matrix, repairs and promoted moves, compute, the summary
                (faults.json, faults.md)
"""
