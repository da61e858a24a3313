"""Writing data files (rolling, bounded) and checking data against a schema."""
