"""The documentation site's generated pages: the configuration reference from conf/ and the
default run's output in README ("What you should see")."""
