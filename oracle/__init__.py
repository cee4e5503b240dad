"""loopspec-oracle: the FP32 reference of both rounds and the judge of other backends (README.md,
docs/DESIGN.md). A regular package, so a checkout's modules are never mixed with another copy's."""
