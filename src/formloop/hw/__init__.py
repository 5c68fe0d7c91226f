"""Chip specs and the hardware library."""
