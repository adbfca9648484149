# Device call 4 (benchmarks/gpu_bundle.py): install the MiniLM from .gpu/p2 and .gpu/p3, then benchmarks/gpu_fault.py, 2 seeds x 3 arms at once
# (DOMAIN=code: the code defect on code_chat, HumanEval held out: benchmarks/device/code_fault.sh)
R=$PWD; export PYTHONPATH=/tmp/dev/site:$R PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
cd /tmp/dev/store && cat m.00 $R/.gpu/p3/m.01 > minilm.tar && grep minilm sums | sha256sum -c || exit 3
tar xf minilm.tar -C /tmp/dev && ls /tmp/dev/site | grep minilm; cd $R
save() { tar czf $OUT/progress.tgz -C /tmp/gpu/out --exclude=checkpoints --exclude=policy --exclude=skills --exclude=tmp --exclude=harness --exclude=evaluator --exclude=rollouts --exclude=tasks --exclude=smollm2 . 2>/dev/null; }
( while sleep 20; do save; done ) & SAVER=$!
( while sleep 45; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done ) & SMI=$!
timeout -k 5 ${BUDGET:-450} python3 benchmarks/gpu_fault.py --out /tmp/gpu/out --model /tmp/gpu/smollm2 --device cuda --domain ${DOMAIN:-math} ${DEFECT:+--defect $DEFECT} \
  --seeds 0,1 --phases ${PHASES:-3} --steps ${STEPS:-30} --prompts ${PROMPTS:-16} --jobs 6 \
  --set backtest.trial_steps=${TRIAL:-10} --set backtest.trial_seeds=1 --set evolution.max_candidates=${CANDIDATES:-2} \
  --set evolution.max_engineer_rounds=1 --set evolution.counterfactual_seeds=1 $(for s in ${SET:-}; do echo --set $s; done) > /tmp/gpu/main.log 2>&1
echo "exit $?"; pkill -f gpu_fault.py; pkill -f trainer/service.py; kill $SAVER $SMI; sleep 1; save
grep -v "it/s" /tmp/gpu/main.log | tee $OUT/log.txt | tail -30
for d in /tmp/gpu/out/evotrainer-seed*; do echo "== $d"; git -C $d/harness log --oneline --all | head -20; done > $OUT/harness_log.txt 2>&1
cp /tmp/gpu/out/gpu_fault.json $OUT/ 2>/dev/null; for f in /tmp/gpu/out/*.log; do echo "== $f"; grep -v "it/s" $f | tail -n 15; done > $OUT/run_logs.txt 2>&1; true
