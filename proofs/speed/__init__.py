"""How fast fastdec's strategies are against its own autoregressive baseline, and why
(docs/design.md section 5 "Performance model", section 6 check 6). One protocol for every speed
figure: `loopcert bench`'s report, the regression gates and certify's speed check.

    settings.py            which settings are timed, and their labels (the grid, the gate settings)
    timing.py              the timing protocol: interleaved rounds, decode-only clocks, paired ratios
    costs.py               the cost of one engine call; ideal speedup and efficiency
    rows.py                one row per timed setting (speedup, ideal, efficiency, acceptance statistics)
    theorem2_vs_measured.py  depth spectrum; Theorem 2's optimum beside the measured best (d1, d2)
    context.py             speedup against context length beside docs/design.md's performance model
    targets.py             the speed targets, judged
    report.py              the report as typed data (SpeedReport), the bench plans
    bench.py               `loopcert bench`: measures a SpeedReport (reports/speedup.py renders it)
    gates.py               regression gates against benchmarks/baseline.json (bench protocol, tolerances)
    false_alarm.py         how often the gates fail an unchanged tree: `python -m proofs.speed.false_alarm`
    slowdown.py            a decoder made slower on purpose: the speed gates' negative control (test-only)
    check.py               certify's speed check

Every module measures or judges and returns data; reports/ only renders.
"""
