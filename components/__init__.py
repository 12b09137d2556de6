"""KFP components: thin typed wrappers over the `trainer` library, one per module.

Deliberately imports nothing: component bodies import `components.artifacts` at run time
inside the KFP executor, where defining components again would fail.
"""
