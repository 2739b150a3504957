"""The book_flight plugin: search flights, pick one, pick a seat, get a ticket."""
