"""Market data: the order book series the environments step through (DESIGN §3).

`load_market(cfg.market, seed, validation)` builds the configured source (`market=synthetic_waves`,
the seeded generator, or `market=file`, a CSV or Parquet quotes file) and divides it by time into
`Market(train, heldout, fold)`: the single split or one walk-forward fold (market/folds.py).
"""

from alpha_rl.market.book import Book
from alpha_rl.market.config import FileMarketConfig, SyntheticWavesConfig, market_config
from alpha_rl.market.files import read_quotes_file
from alpha_rl.market.folds import Fold, SingleSplit, Validation, WalkForward, validation_config
from alpha_rl.market.load import Market, divide, load_market
from alpha_rl.market.synthetic import synthetic_waves

__all__ = [
    "Book",
    "FileMarketConfig",
    "Fold",
    "Market",
    "SingleSplit",
    "SyntheticWavesConfig",
    "Validation",
    "WalkForward",
    "divide",
    "load_market",
    "market_config",
    "read_quotes_file",
    "synthetic_waves",
    "validation_config",
]
