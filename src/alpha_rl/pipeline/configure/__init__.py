"""A run's config made a plan: the validated keys and options, the parts that own ISV slots and
fill them from the config, the scale, the memory check and the search objective."""
