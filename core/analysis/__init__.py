"""Questions about runs, above the runs themselves: what-if tables, comparisons, the race and calibration.

Nothing below imports it.
"""
