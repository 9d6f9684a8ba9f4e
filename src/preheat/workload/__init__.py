"""The workload library: what traffic a pool is offered, independent of who replays it.

Traces (:mod:`preheat.workload.traces`: Mooncake, Azure and preheat JSONL files, their prompt
text), the trace flags that ``preheat load`` and ``preheat simulate`` share
(:mod:`~preheat.workload.traceargs`), bursts cut from a trace (:mod:`~preheat.workload.bursts`),
superposed copies of a trace (:mod:`~preheat.workload.superpose`) and exact-length prompt text
for the sim tokenizer (:mod:`~preheat.workload.prompts`). It imports nothing of preheat's but
:mod:`preheat.core`: ``load``, ``simulate`` and ``bench`` stand on it."""
