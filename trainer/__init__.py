"""The generic trainer that runs inside a worker (no Beam imports here)."""
