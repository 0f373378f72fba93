"""The measurement core shared by every experiment: devices, timers, statistics, rows, files."""
