"""Market data: the order book series the environments step through (DESIGN §3).

`load_market(cfg.market, cfg.seed)` builds the configured source (`market=synthetic_waves`, the
seeded generator, or `market=file`, a CSV or Parquet quotes file) and splits it by time into
`Market(train, heldout)`.
"""

from alpha_rl.market.book import Book
from alpha_rl.market.config import FileMarketConfig, SyntheticWavesConfig, market_config
from alpha_rl.market.files import read_quotes_file
from alpha_rl.market.load import Market, load_market, split_book
from alpha_rl.market.synthetic import synthetic_waves

__all__ = [
    "Book",
    "FileMarketConfig",
    "Market",
    "SyntheticWavesConfig",
    "load_market",
    "market_config",
    "read_quotes_file",
    "split_book",
    "synthetic_waves",
]
