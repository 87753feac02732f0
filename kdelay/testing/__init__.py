"""Test support that ships with the package, so subprocesses of the test-suite can import
it: fault injection under kdelay.fsio (crash points, lost page cache, ENOSPC)."""
