"""Training tasks other than node classification, kept apart from the models: link prediction's edge splits
(:mod:`.split`), keyed negatives (:mod:`.negatives`), pair decoders (:mod:`.decoders`), ranking metrics
(:mod:`.metrics`) and what a strategy calls to train and score pairs (:mod:`.link`)."""
