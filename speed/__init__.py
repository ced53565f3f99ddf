"""How fast fastdec's strategies are against its own autoregressive baseline, and why
(docs/design.md section 5 "Performance model", docs/speed.md). One protocol for every speed
figure: `loopcert bench`'s report, the regression gates (proofs.gates) and certify's speed check
(proofs.checks.speed) all time through timing.py.

    settings.py            which settings are timed, and their labels (the grid, the gate settings,
                           the fastdec settings certify samples)
    timing.py              the timing protocol: interleaved rounds, decode-only clocks, paired ratios
    costs.py               the cost of one engine call; ideal speedup and efficiency
    rows.py                one row per timed setting (speedup, ideal, efficiency, acceptance statistics)
    theorem2_vs_measured.py  depth spectrum; Theorem 2's optimum beside the measured best (d1, d2)
    context.py             speedup against context length beside docs/design.md's performance model
    batch_table.py         throughput against batch size
    targets.py             the speed targets, judged
    report.py              the report as typed data (SpeedReport), the bench plans
    measure.py             `loopcert bench`: measures a SpeedReport (reports/speedup.py renders it)
    engines.py             other engines' greedy rates beside fastdec's (the engine tests' table)
    round_worker.py        one side of the paired gate: a process timing rounds on request
    slowdown.py            a decoder made slower on purpose: the speed gates' negative control (test-only)

It sits below proofs (tests/test_imports.py): it measures and returns data, and imports nothing
of the checks; reports/ only renders.
"""
