"""Training and model-card generation for the embedded default model.

Kept out of refdec (the oracle) on purpose: refdec's modules never import this package.
It sits on top of refdec (the model), proofs (the depth profile and envelope fit) and
reports; `loopcert train` fronts it.
"""
