"""``kubellm`` subcommands that belong to the runtime (generate, serve, bench).

May import: everything in the runtime, lazily (``kubellm --help`` stays light).
"""
