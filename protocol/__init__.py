"""Strata protocol layer (see ../DESIGN in shared/)."""
