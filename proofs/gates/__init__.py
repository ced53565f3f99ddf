"""The regression gates: checks of this tree's speed and exact figures against
benchmarks/baseline.json (`loopcert bench --gate`, docs/speed.md), timed through speed.timing.

    baseline.py     the stored figures: exact counts and tokens, speed within a tolerance
    paired.py       the paired speed figures: the baseline's commit exported and timed beside this
                    tree, one speed.round_worker process per tree
    false_alarm.py  how often the gates fail an unchanged tree: `python -m proofs.gates.false_alarm`
"""
