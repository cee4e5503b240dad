"""The backend runtime: the contract, the backends' loading, a plug-in's own process and cancellation."""
