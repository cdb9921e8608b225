"""The continuous mirror (docs/DESIGN.md §12): the selected topics kept on a DR cluster at the
source's offsets while the source is live, round after round, with the consumer groups' offsets
and the mirror's lag recorded as it goes."""
