"""Entropy coding shared by every strata subsystem: rANS with static per-context tables
(:mod:`.rans`, :mod:`.tables`) and binning of wide integer ranges into a small alphabet
(:mod:`.binning`)."""
