"""A one-line progress bar on stderr (no dependency), redrawn in place."""
import sys
import time


class ProgressBar:
    def __init__(self, total, prefix, stream=sys.stderr, width=24):
        self.total, self.prefix, self.stream, self.width = total, prefix, stream, width
        self.start = time.perf_counter()
        self.interactive = stream.isatty()

    def update(self, done, suffix=""):
        if not self.interactive and done != self.total:
            return  # in a log file one final line is enough
        filled = self.width * done // max(self.total, 1)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.prefix} [{bar}] {done}/{self.total} {suffix}")
        if done == self.total:
            self.stream.write("\n")
        self.stream.flush()
