"""The Beam transforms, one stage per module: read, generate, score, aggregate, write."""
