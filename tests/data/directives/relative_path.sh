#!/bin/bash
#RSA_DATA_IN=data/in
#RSA_DATA_OUT=./out
