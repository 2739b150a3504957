"""What makes N workers one service (DESIGN §10, §11): which worker holds a call, and taking
over the calls of a worker that is gone."""
