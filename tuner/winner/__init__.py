"""The end of a study: finalists re-timed side by side (select), the winner exported and verified."""
