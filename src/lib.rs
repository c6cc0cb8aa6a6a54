//! tickless (work in progress)
mod wheel;
