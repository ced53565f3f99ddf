"""What a certify run costs, in one place (docs/scale.md, "Where the cost lives"): the memory it
needs (need, kv_need), the layer-cut estimate of its time (estimate), the measured prediction
(predict), and the one table from a check to the part of the run it is costed in (parts).

Layers (tests/test_imports.py PROOFS_LAYERS): need and kv_need rank with proofs.run, whose
RunModels.load asks them before it loads a byte; the rest ranks above proofs.run (the prediction
drives a probe run). Nothing is imported here, so that importing the memory need does not pull in
the run.
"""
