"""Example attnbench plugin: importing `.cosine` registers the variant `cosine_softmax`."""
