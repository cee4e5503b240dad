"""The plans and their executor, the one verdict, and each kind's work."""
