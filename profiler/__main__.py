from profiler.cli import entry

entry()
