"""Strata remote layer (see ../DESIGN in shared/)."""
