"""Fault layers for strata's own tests and torture runs (LevelDB keeps its fault-injection
``Env`` beside its tests the same way): ``faults`` for files, through the seam of
``strata.files.io``; ``tier_faults`` for tier backends. No module of strata imports this
package; it reaches the code under test only through ``strata.files.io.install``."""
