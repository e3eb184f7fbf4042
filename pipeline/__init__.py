"""Strata pipeline layer (see ../DESIGN in shared/)."""
