/* connection.js: the socket's state, shown to the person; answers given offline are sent once it is back. */
