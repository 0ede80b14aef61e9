"""What a model's tokens cost: sweep's price table, and the plan's `prices` over it.

The metering relay (relay.py) prices each response's usage with the model the response names
(not the one the CLI believes it asked for: a gateway may answer with another), so the session's
cost is sweep's arithmetic on what the endpoint reported, never the CLI's own figure.

    prices = { input_per_mtok = 3.0, output_per_mtok = 15.0 }            # every model of this role
    prices = { "my-gateway-model" = { input_per_mtok = 3.0, output_per_mtok = 15.0 } }   # per model

USD per million tokens: `input_per_mtok` (uncached input), `output_per_mtok`, and optionally
`cached_input_per_mtok` (cache reads; default: the input price) and `cache_write_per_mtok`
(Anthropic's cache creation; default: the input price). A model neither in the plan's table nor
in sweep's is unpriced: the session's cost is then unknown and it is charged its whole reservation.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from runstate.errors import ConfigError

PRICE_KEYS = ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok")
MAX_PRICE = 10_000.0


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cached_input: float
    cache_write: float

    @classmethod
    def of(cls, table: dict) -> Price:
        inp = float(table["input_per_mtok"])
        return cls(input=inp, output=float(table["output_per_mtok"]),
                   cached_input=float(table.get("cached_input_per_mtok", inp)),
                   cache_write=float(table.get("cache_write_per_mtok", inp)))


# List prices (USD per million tokens) of the models the two CLIs use by default, as the vendors
# publish them; a plan's `prices` replaces any of them (a negotiated rate, a gateway's model).
_TABLE: dict[str, tuple[float, float, float, float]] = {
    # model: (input, output, cached input / cache read, cache write)
    "claude-opus-4-5": (5.0, 25.0, 0.5, 6.25),
    "claude-opus-4-1": (15.0, 75.0, 1.5, 18.75),
    "claude-opus-4": (15.0, 75.0, 1.5, 18.75),
    "claude-sonnet-4-5": (3.0, 15.0, 0.3, 3.75),
    "claude-sonnet-4": (3.0, 15.0, 0.3, 3.75),
    "claude-haiku-4-5": (1.0, 5.0, 0.1, 1.25),
    "claude-3-5-haiku": (0.8, 4.0, 0.08, 1.0),
    "gpt-5": (1.25, 10.0, 0.125, 1.25),
    "gpt-5-codex": (1.25, 10.0, 0.125, 1.25),
    "gpt-5.1": (1.25, 10.0, 0.125, 1.25),
    "gpt-5.1-codex": (1.25, 10.0, 0.125, 1.25),
    "gpt-5-mini": (0.25, 2.0, 0.025, 0.25),
    "gpt-5-nano": (0.05, 0.4, 0.005, 0.05),
    "gpt-4.1": (2.0, 8.0, 0.5, 2.0),
    "o4-mini": (1.1, 4.4, 0.275, 1.1),
}
BUILT_IN = {name: Price(*row) for name, row in _TABLE.items()}
# a dated snapshot or an alias of a listed model costs what it does; nothing else is guessed
# (gpt-5-pro is not gpt-5: a prefix match would price it at a tenth of its rate)
_SNAPSHOT = re.compile(r"^(?P<base>.+?)(-\d{8}|-\d{4}-\d{2}-\d{2}|-latest)$")


def check_prices(prices: object, field: str = "runtime_options.prices") -> None:
    """ConfigError naming the field unless `prices` is a flat price table or {model: table}."""
    if not isinstance(prices, dict) or not prices:
        raise ConfigError("prices must be a table", field=field)
    tables = [("", prices)] if "input_per_mtok" in prices or "output_per_mtok" in prices else list(prices.items())
    for model, table in tables:
        where = f"{field}.{model}" if model else field
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table of USD per million tokens ({', '.join(PRICE_KEYS)})",
                              field=where)
        bad = [k for k, v in table.items() if k not in PRICE_KEYS or isinstance(v, bool)
               or not isinstance(v, (int, float)) or not 0 <= v < MAX_PRICE]
        if bad or "input_per_mtok" not in table or "output_per_mtok" not in table:
            raise ConfigError(f"{where} needs input_per_mtok and output_per_mtok (and optionally "
                              "cached_input_per_mtok, cache_write_per_mtok), USD per million tokens, each 0-10000",
                              field=where)


def price_for(model: str | None, prices: dict | None) -> Price | None:
    """The price of `model`: the plan's table first (flat = every model), then sweep's; None = unpriced."""
    if prices:
        if "input_per_mtok" in prices:
            return Price.of(prices)
        if model and isinstance(prices.get(model), dict):
            return Price.of(prices[model])
    if not model:
        return None
    if model in BUILT_IN:
        return BUILT_IN[model]
    m = _SNAPSHOT.match(model)
    if m and m.group("base") in BUILT_IN:
        return BUILT_IN[m.group("base")]
    return None


def cost_usd(price: Price, *, fresh_input: int, cached_input: int, cache_write: int, output: int) -> float:
    return (fresh_input * price.input + cached_input * price.cached_input + cache_write * price.cache_write
            + output * price.output) / 1e6
