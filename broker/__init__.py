"""Strata broker layer (see ../DESIGN in shared/)."""
