"""Views of the board that answer a reader's question from the same rows as the rest of the page:
`chooser` ("which attention for my case") and `summary` (the page's first answers)."""
