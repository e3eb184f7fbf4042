"""Strata storage layer (see ../DESIGN in shared/)."""
