"""Scale-out: Graph Challenge inference with its rows split over workers (:mod:`.shard`) and
how the rows are split (:mod:`.rows`)."""
