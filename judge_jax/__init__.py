"""An independent JAX FP32 Ouro model, the jax backend, and the FP32 judge at scale."""
