"""``kubellm`` subcommands that belong to the runtime (generate, serve, bench)."""
