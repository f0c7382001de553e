"""``graphscale advise``: a machine profile, a prediction per strategy, and the command that ranks them."""
