"""The harness wing: the run's harness git repository and what may be in it.

    repo.py    HarnessRepo: seed, candidate commits with trailers, notes, and every move of ``main`` (promote,
               revert, restore); nothing outside it moves ``main`` or reaches into GitPython
    knobs.py   the schema of ``harness.yaml`` (Knobs): every RL knob an edit may set, typed and bounded
    files.py   what a harness tree may hold (sizes, file kinds, bounded YAML) and exporting one safely
    edits.py   rules about an edit's text shared by the loop and the Engineers (what counts as a subtraction)
    faults.py  the catalogue of seed-harness defects (harness_repo/faults/): names, cards, a faulty seed built
    generated.py  generated defects (gen-SEED-K) drawn from families across every harness layer, with random
               constants and forms, each written as a catalogue defect's folder (the fault bench's generated suite)
"""
