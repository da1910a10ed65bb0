"""How the claims' pages print a number, a p-value and an interval."""
from typing import Optional

MINUS = "−"


def num(value: float, digits: int = 2, sign: bool = True) -> str:
    text = f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"
    return text.replace("-", MINUS)


def pval(p: Optional[float], level: float = 0.01) -> str:
    """"p = 0.041", "p < 0.001", or as many digits as it takes for the printed p to fall on the
    same side of ``level`` as p itself (0.00999 prints as "p = 0.00999", never "p = 0.010")."""
    if p is None:
        return "p not tested"
    if p < 0.001:
        return "p < 0.001"
    if p >= 0.1:
        return f"p = {p:.2f}"
    digits = 3
    while digits < 8 and (float(f"{p:.{digits}f}") < level) != (p < level):
        digits += 1
    return f"p = {p:.{digits}f}"


def interval_text(interval, suffix: str = "") -> str:
    lo, hi = interval
    return f"[{num(lo)}, {num(hi)}]{suffix}"
