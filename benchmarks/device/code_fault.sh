# Device call 4 for the code domain (issue 41, item 6; benchmarks/gpu_bundle.py gives calls 1-3): SmolLM2-135M-Instruct
# on the code chat seed with a catalogue code defect (DEFECT, default exit_status), HumanEval as the held-out split,
# static / evotrainer / oracle x 2 seeds at once. Its CPU check: tests/test_gpu_fault.py (the code harness and a
# one-step run of the script on a tiny chat policy).
DOMAIN=code exec bash "$(dirname "$0")/fault_run.sh"
