"""Constants shared by the input-independent self-attention's modules."""

# RAN's options (Zeng et al. 2021): the transition (§2.3) and the decoder's use of A_0 (§2.2)
RAN_TRANSITIONS = ("paper", "ffn")
RAN_DECODER_INITIAL = ("lower-triangle", "full")
# A_0's random initialization (§2.2 says only "randomly initialized"): N(0, n^-1/2) (the default),
# or Xavier-uniform over the (h, n, n) tensor as in the authors' released code
RAN_INITIAL_INIT = ("normal", "xavier")

# Decoding steps whose weights are copied out for every hypothesis at once (PositionalSelfAttention)
STEP_BLOCK = 16

# Masked logits get a large finite value (softmax runs in float32): a fully masked row then yields
# uniform weights instead of NaN.
_MASKED = -1e9


def _too_long(length: int, max_positions: int, what: str, limit: str, advice: str) -> ValueError:
    """The error for a sentence longer than the n positions; ``limit`` is the name its user sets
    n by and ``advice`` what else they can do (the model that builds the matrices gives both)."""
    return ValueError(
        f"{what} has {length} positions but the input-independent self-attention covers only "
        f"{max_positions} ({limit}={max_positions}); raise {limit}{advice}"
    )


class PositionLimit(int):
    """A model's maximum sentence length that remembers the flag that sets it (a model's
    ``max_positions()`` may return one); it prints as ``256 (--max-attention-positions)`` in
    fairseq's messages and pickles as a plain int."""

    def __new__(cls, value, flag):
        limit = super().__new__(cls, value)
        limit.flag = flag
        return limit

    def __repr__(self):
        return f"{int(self)} ({self.flag})"

    def __reduce__(self):
        return int, (int(self),)
