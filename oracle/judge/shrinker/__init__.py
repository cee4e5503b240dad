"""The shrinker: a failing verdict's smallest case."""
