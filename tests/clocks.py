"""A clock the test sets: what timing logic that takes an injectable clock is tested with, exactly."""


class FakeClock:
    def __init__(self, start: float = 0.0):
        self.t = start

    def __call__(self) -> float:
        return self.t

    def engine(self, *seconds: float):
        """A call that takes seconds[i % len] on the i-th run: a steady engine, or one that load slows now and then."""
        runs = [0]

        def call():
            self.t += seconds[runs[0] % len(seconds)]
            runs[0] += 1
        return call
