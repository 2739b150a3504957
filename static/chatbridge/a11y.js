/* a11y.js: keyboard behaviour of the chat's widgets (roving focus in grids). */
