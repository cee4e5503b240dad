"""`python -m oracle bench`: c(M) tables and paired block/loop round timing on the torch
backend (docs/DESIGN.md section 10). Imports run one way: bench -> kernels and oracle;
nothing imports bench (oracle/cli/__init__.py names its command by a "module:attr" string)."""
